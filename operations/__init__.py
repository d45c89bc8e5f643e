"""Tools for running a league in production: the soak (memory and CPU over hours), chaos
(kills and node loss with exact counts) and the per-actor CPU profile (docs/operations.md)."""
