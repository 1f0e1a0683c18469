"""The role registry: each agent role's output schema, its inputs and its teacher and student prompts."""
