"""Workers and pools: registration, leases over HTTP, compatibility."""
