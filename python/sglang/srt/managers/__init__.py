"""Process managers: scheduler, TP worker, tokenizer and detokenizer managers."""
