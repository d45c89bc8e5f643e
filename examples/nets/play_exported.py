import json, sys
import numpy as np, onnxruntime as ort, pyspiel

folder = sys.argv[1]  # what `python -m serve.export --out` wrote
meta = json.load(open(f"{folder}/policy.json"))
members = [ort.InferenceSession(f"{folder}/{m['file']}") for m in meta["members"]]
weights = np.array([m["weight"] for m in meta["members"]])
game, rng, returns = pyspiel.load_game(meta["game"], meta["game_params"]), np.random.default_rng(0), []
for episode in range(100):
    policy = members[rng.choice(len(members), p=weights / weights.sum())]  # one member per episode
    state = game.new_initial_state()
    while not state.is_terminal():
        if state.is_chance_node():
            outcomes, p = zip(*state.chance_outcomes())
            state.apply_action(int(rng.choice(outcomes, p=p)))
        elif state.current_player() == 0:  # the Nash mixture plays seat 0
            obs = np.array([getattr(state, meta["observation"])(0)], dtype=np.float32)
            mask = np.array([state.legal_actions_mask(0)], dtype=bool)
            probs = policy.run(None, {"obs": obs, "mask": mask})[0][0]
            state.apply_action(int(rng.choice(len(probs), p=probs / probs.sum())))
        else:  # a uniform random opponent at seat 1
            state.apply_action(int(rng.choice(state.legal_actions())))
    returns.append(state.returns()[0])
print(json.dumps({"episodes": len(returns), "mean_return_seat0": float(np.mean(returns))}))
