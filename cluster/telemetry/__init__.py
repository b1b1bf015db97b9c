"""Samples from the agents: collection (exactly once), storage, minute and hour rollups, the samples
import, and the utilization charts."""
