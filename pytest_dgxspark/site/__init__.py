"""The site as the suite reads it: inventory, RKE2 vars, the HelmChart (model.py), their schemas, the kubeconfig, the
governance files (waivers, manual checks) and the site repository's own automation, validated before anything connects.

It may import `data/`, `catalog/` and the check vocabulary.
"""
