"""Consumer groups: the group coordinator and the ``__consumer_offsets`` store."""
