"""A Canal destination: configuration, sink, store and meta wired together (see ``config`` for conf/)."""
