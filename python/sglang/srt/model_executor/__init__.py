"""Model execution: model runner and graph runners."""
