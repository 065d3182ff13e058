"""Transports of a run: SSH hosts (ssh.py) and Kubernetes clusters (cluster.py)."""
