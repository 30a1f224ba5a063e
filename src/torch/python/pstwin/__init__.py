"""pstwin's Python API. pstwin.torch is BytePS's byteps.torch on pstwin's real backend (docs/API.md);
python3 -m pstwin.server runs a job's server or scheduler role (DMLC_ROLE)."""
