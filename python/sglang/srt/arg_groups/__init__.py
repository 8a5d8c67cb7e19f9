"""``ServerArgs`` building blocks: field metadata, the resolution pipeline,
declarations and overrides, CLI generation, validation and the provenance dump."""
