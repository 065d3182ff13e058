"""The audit-ready handover bundle: summary, manifest, signature, drift and the report CLI."""
