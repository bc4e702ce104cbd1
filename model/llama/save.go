package llama

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/dszero/dszero/model"
)

// DefaultMaxShardBytes is save_pretrained's default max_shard_size, "5GB"
// (decimal, as huggingface_hub parses it).
const DefaultMaxShardBytes = 5_000_000_000

// TokenizerFiles are the files of a Hugging Face directory that SaveDir
// copies through from SaveOptions.Source when they exist there.
var TokenizerFiles = []string{
	"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
	"vocab.json", "merges.txt", "added_tokens.json", "chat_template.jinja", "chat_template.json",
}

// SaveOptions configure SaveDir.
type SaveOptions struct {
	// DType of the written tensors: "float32", "bfloat16" or "float16"
	// (values rounded to nearest even); "" means the config's DType, else
	// float32.
	DType string
	// MaxShardBytes splits the weights into shards above this size; 0
	// means DefaultMaxShardBytes.
	MaxShardBytes int64
	// Source, if set, is the Hugging Face directory the model came from:
	// its tokenizer files and generation_config.json are copied through.
	Source string
}

// SaveDir writes a directory transformers loads with from_pretrained:
// config.json, generation_config.json (Source's, or one derived from the
// config), the weights with their Hugging Face names (model.safetensors,
// or shards and model.safetensors.index.json above MaxShardBytes;
// lm_head.weight only when untied) and Source's tokenizer files. read
// supplies elements [lo, lo+len(dst)) of the flat parameter buffer, in
// flat-buffer order a piece at a time, so the weights are written without
// ever being whole in memory (a stage-3 engine gathers each piece).
func SaveDir(dir string, cfg Config, read func(dst []float32, lo int) error, opt SaveOptions) error {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	dtype := opt.DType
	if dtype == "" {
		dtype = cfg.DType
	}
	if dtype == "" {
		dtype = "float32"
	}
	st, err := safetensorsDType(dtype)
	if err != nil {
		return err
	}
	maxShard := opt.MaxShardBytes
	if maxShard == 0 {
		maxShard = DefaultMaxShardBytes
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("llama: %w", err)
	}
	l := cfg.Layout()
	const piece = 1 << 20
	var buf []float32
	ts := make([]model.Tensor, len(l.Specs))
	for i, s := range l.Specs {
		ts[i] = model.Tensor{Name: s.Name, Shape: s.Shape, DType: st, Stream: func(yield func([]float32) error) error {
			for off := 0; off < s.Numel; off += piece {
				n := min(piece, s.Numel-off)
				if cap(buf) < n {
					buf = make([]float32, min(piece, s.Numel))
				}
				b := buf[:n]
				if err := read(b, s.Offset+off); err != nil {
					return err
				}
				if err := yield(b); err != nil {
					return err
				}
			}
			return nil
		}}
	}
	if _, err := model.WriteSafetensorsDir(dir, ts, maxShard, map[string]string{"format": "pt"}); err != nil {
		return fmt.Errorf("llama: %w", err)
	}
	if err := WriteConfig(filepath.Join(dir, "config.json"), cfg, dtype); err != nil {
		return err
	}
	return writeSideFiles(dir, cfg, opt.Source)
}

// writeSideFiles copies Source's tokenizer files and generation config
// into dir, or derives generation_config.json from the config.
func writeSideFiles(dir string, cfg Config, source string) error {
	gen := filepath.Join(dir, "generation_config.json")
	copied := false
	if source != "" {
		for _, name := range append([]string{"generation_config.json"}, TokenizerFiles...) {
			ok, err := copyIfExists(filepath.Join(source, name), filepath.Join(dir, name))
			if err != nil {
				return err
			}
			copied = copied || ok && name == "generation_config.json"
		}
	}
	if copied {
		return nil
	}
	b, err := generationJSON(cfg)
	if err != nil {
		return fmt.Errorf("llama: %s: %w", gen, err)
	}
	return os.WriteFile(gen, b, 0o644)
}

// copyIfExists copies src to dst unless src does not exist or is dst
// itself, and reports whether dst now holds src's content.
func copyIfExists(src, dst string) (bool, error) {
	in, err := os.Open(src)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("llama: %w", err)
	}
	defer in.Close()
	si, err := in.Stat()
	if err != nil {
		return false, fmt.Errorf("llama: %w", err)
	}
	if di, err := os.Stat(dst); err == nil && os.SameFile(si, di) {
		return true, nil
	}
	tmp := dst + ".tmp"
	out, err := os.Create(tmp)
	if err != nil {
		return false, fmt.Errorf("llama: %w", err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		os.Remove(tmp)
		return false, fmt.Errorf("llama: copying %s: %w", src, err)
	}
	if err := out.Close(); err != nil {
		os.Remove(tmp)
		return false, fmt.Errorf("llama: %w", err)
	}
	return true, os.Rename(tmp, dst)
}

// SaveDir writes the bound parameters as a Hugging Face directory (see
// the function SaveDir).
func (m *Model) SaveDir(dir string, opt SaveOptions) error {
	if m.params == nil {
		return errors.New("llama: SaveDir before Bind")
	}
	return SaveDir(dir, m.cfg, func(dst []float32, lo int) error { copy(dst, m.params[lo:]); return nil }, opt)
}
