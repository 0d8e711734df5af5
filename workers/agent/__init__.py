"""The worker agent: its settings (settings), the job of each kind of leased work (jobs),
the lease keeper (keeper), the loops (loop), what it sets up on its host (host), and how an
agent is started (launch)."""
