"""pytest hooks of the handover report (being built)."""
