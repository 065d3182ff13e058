"""How the suite reads and cleans data: the strict YAML loader, plain value helpers, the one redaction layer.

The ground floor beside the check vocabulary (`pytest_dgxspark.checking`): it imports nothing else of the package, and
every layer may import it.
"""
