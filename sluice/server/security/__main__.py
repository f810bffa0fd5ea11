"""``python -m sluice.server.security``: SCRAM users with kafka-configs' flags (:mod:`.users`)."""

from .users import main

if __name__ == "__main__":
    main()
