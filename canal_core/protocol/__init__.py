"""What every layer of canal_core shares, as Canal's protocol and common modules: binlog positions and client
identities (``position``, ``identity``), the batch a get returns (``message``), the generated protobuf and its
wire helpers (``proto``, ``wire``), the TCP packet codec (``codec``), the password scramble (``auth``), the
ZooKeeper path layout (``zkpaths``) and the root of the typed errors (``errors``). It imports nothing else of
canal_core."""
