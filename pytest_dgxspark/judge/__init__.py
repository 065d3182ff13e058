"""Judgement: the one Status type and the stash keys (status.py), test records, evidence, attribution of faults, the
fold of test outcomes into rule statuses and the verdict, the run order, the scope, the testbed's identity, and what
one run knows so far (runstate.py).

It may import every layer below it, never `report/` or the plugin's face.
"""
