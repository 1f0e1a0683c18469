"""The agent pipeline: roles, their schemas and prompts, the stage-batched runner, reflection, traces, the run store."""
