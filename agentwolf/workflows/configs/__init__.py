"""The config registry (config_registry.py: one long-lived workflow per config name, its versions and
rollbacks) and the new version it sends its sessions (config_update.py)."""
