"""The plan and the fleet shown: text, markdown, JSON and HTML."""
