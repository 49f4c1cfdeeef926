"""`python -m felab.mock_server` (what `make mock` runs) starts the practice server."""

from felab.mock_server.serve import main

main()
