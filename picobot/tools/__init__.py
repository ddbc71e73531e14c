"""Tools the model may call, behind one protocol and a registry."""
