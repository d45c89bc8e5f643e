"""How good a league's policies are: exact exploitability (NashConv) of a policy or a Nash
mixture, the best-response probe, fixed anchor bots and scores against them, play-time
search as a player, head to head between runs, and the one reader of a finished run's store."""
