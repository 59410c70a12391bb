"""One warm process that solve commands hand their work to."""
