"""DLRM and DLRM-DCNv2 (MLPerf recommendation) on Criteo: TorchRec-sharded or single-device embeddings."""
