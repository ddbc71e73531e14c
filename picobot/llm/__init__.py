"""Language model providers behind one protocol (see :mod:`picobot.llm.base`)."""
