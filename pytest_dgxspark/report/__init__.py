"""The audit-ready handover bundle: results.json, the terminal's closing block, the summary and its PDF, CTRF, the
attestation, the manifest and its signature, drift, the redaction guard over what is written, and the report CLI.

It may import every layer below it, never the plugin's face (it receives the run plan).
"""
