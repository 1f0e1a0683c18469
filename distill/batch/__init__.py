"""The OpenAI Batch API path for trace generation: submit, poll and collect rounds."""
