"""Every piece of I/O a session does runs here, as a Temporal activity that looks its host up."""
