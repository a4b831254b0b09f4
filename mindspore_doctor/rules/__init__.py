"""Rules judge: pure functions from signals (plain numbers) and config to findings."""
