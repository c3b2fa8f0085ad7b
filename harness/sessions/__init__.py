"""Sessions: multi-turn trajectories replayed by perfdag's own scheduler (LoadGen has no sessions).

trajectories (the JSONL reader), salts (KV-reuse control), chat (one chat turn sent and timed),
scheduler (users, turn order, delays, the performance window), metrics (per turn, in the window),
inline (the inline accuracy of replayed turns), workload (one run: its files and result.json).
"""
