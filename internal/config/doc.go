// Package config is the gateway's configuration: the YAML schema, its
// defaults and its validation.
//
// A config file needs only models and at least one replica or DNS group;
// every other key has a default (see [Default]). Parse and Load decode
// strictly: an unknown key, a duplicated key, a value of the wrong type, a
// duration without a unit or a second YAML document in the file is an error.
// Every problem is reported at once, joined with [errors.Join], each one an
// [*Error] that names the line, the key's path and the rule it breaks:
//
//	line 12: replicas[2].url: must be an absolute http or https URL
//
// Anchors, aliases and merge keys (<<) work as YAML defines them, but aliases
// may not make the document more than a few times larger than it is written,
// so a small hostile file cannot expand into a huge one.
package config
