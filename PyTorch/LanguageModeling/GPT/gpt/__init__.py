"""GPT: decoder-only language-model pretraining (GPT-3 and Llama 3 shapes) on FSDP2 and tensor parallelism."""
