"""rackctl: declarative reconciler for rack-scale NVLink GPU clusters."""

__version__ = "0.1.0"
