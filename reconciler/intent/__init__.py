"""The user's declared intent: the ClusterIntent model, loaded and validated."""
