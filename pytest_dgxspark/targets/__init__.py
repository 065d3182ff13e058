"""Reaching what a run checks: hosts over SSH or locally (testinfra), clusters over the kubernetes client, the choice
between a site's targets and a testbed's (selection.py), and why a target could not be reached (causes.py).

A transport opens, runs and closes; it never calls a probe or a check. It may import `data/`, `catalog/`, `site/` and
the check vocabulary.
"""
