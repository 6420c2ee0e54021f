// Package chattemplate renders chat requests with a model's chat template as
// vLLM prepares them, transformers' apply_chat_template over Jinja2 (here
// github.com/ardanlabs/jinja): the conversation vLLM builds from the
// request's messages, its tools and documents as its request models dump
// them, the content format it detects from the template, and the kwargs it
// passes. A Renderer then tokenizes the text with the model's hf.Tokenizer.
// The goldens in testdata are transformers' own renderings, written by
// scripts/goldens/chat_goldens.py.
package chattemplate
