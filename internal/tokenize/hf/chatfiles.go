package hf

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Chat templates kept beside tokenizer_config.json, as transformers saves
// them, and loads them in preference to its chat_template.
const (
	chatTemplateFile = "chat_template.jinja"       // the default template
	chatTemplateDir  = "additional_chat_templates" // NAME.jinja: a named one
)

// chatTemplateFiles reads dir's template files into chat_template's JSON
// form: a string when there is only chat_template.jinja, a list of
// {"name", "template"} objects when there are named ones (the default one
// named "default"), nil when there are none.
func chatTemplateFiles(dir string) (json.RawMessage, error) {
	type named struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	var list []named
	def, err := readFile(filepath.Join(dir, chatTemplateFile))
	switch {
	case err == nil:
		list = append(list, named{"default", string(def)})
	case !errors.Is(err, fs.ErrNotExist):
		return nil, err
	}
	entries, err := os.ReadDir(filepath.Join(dir, chatTemplateDir))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	for _, e := range entries { // sorted by name
		name, ok := strings.CutSuffix(e.Name(), ".jinja")
		if !ok || e.IsDir() {
			continue
		}
		b, err := readFile(filepath.Join(dir, chatTemplateDir, e.Name()))
		if err != nil {
			return nil, err
		}
		if name == "default" && def != nil {
			list[0].Template = string(b) // transformers reads the directory last
			continue
		}
		list = append(list, named{name, string(b)})
	}
	sort.SliceStable(list, func(i, j int) bool { return list[i].Name < list[j].Name })
	switch {
	case len(list) == 0:
		return nil, nil
	case len(list) == 1 && list[0].Name == "default":
		return json.Marshal(list[0].Template)
	}
	return json.Marshal(list)
}

// withTemplateFiles puts dir's template files, when it has any, in place of
// tokenizer_config.json's chat_template.
func withTemplateFiles(cc *ChatConfig, dir string) error {
	files, err := chatTemplateFiles(dir)
	if err != nil {
		return fmt.Errorf("load tokenizer: chat template: %w", err)
	}
	if files != nil {
		cc.Template = files
	}
	return nil
}
