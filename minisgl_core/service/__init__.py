"""The service: the launcher, the process loops of the three roles, the EngineClient over
a transport, run directories and tensor-parallel worker processes."""
