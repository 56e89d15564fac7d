package toolchain

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/gobuild"
	"github.com/bootstick/bootstick/internal/logctx"
	"github.com/bootstick/bootstick/internal/recipes"
)

// recipeRecord is the action record of one Go recipe.
type recipeRecord struct {
	Binaries map[string]cas.Digest `json:"binaries"`
}

func (r *recipeRecord) Blobs() []cas.Digest {
	var out []cas.Digest
	for _, d := range r.Binaries {
		out = append(out, d)
	}
	return out
}

// buildRecipe returns the cached binaries of a recipe, building them first
// when its inputs changed.
func buildRecipe(ctx context.Context, opts Options, goCmd, goVersion string, r *recipes.GoRecipe, label string) (*recipeRecord, bool, error) {
	s := opts.Store
	inputs := map[string]any{
		"action": "gobuild/v1", "recipe": r, "go": goVersion,
		"flags": gobuild.Flags, "env": gobuild.RecipeEnv(r), "epoch": opts.Epoch.Unix(),
	}
	if r.Local != "" {
		h, err := hashLocal(filepath.Join(opts.Spec.Dir, r.Local))
		if err != nil {
			return nil, false, fmt.Errorf("recipe %s: %w", r.Name, err)
		}
		inputs["source"] = h
		// Every package of this repository the binaries import, wherever
		// it lives: a change to any of them rebuilds the recipe.
		var pkgs []string
		for _, p := range r.Packages {
			pkgs = append(pkgs, p.Path)
		}
		deps, err := hashRepoDeps(ctx, goCmd, filepath.Join(opts.Spec.Dir, r.Local), pkgs)
		if err != nil {
			return nil, false, fmt.Errorf("recipe %s: %w", r.Name, err)
		}
		inputs["deps"] = deps
	}
	for old, repl := range r.Replace {
		if filepath.IsAbs(repl) || strings.HasPrefix(repl, ".") {
			h, err := hashLocal(repl)
			if err != nil {
				return nil, false, fmt.Errorf("recipe %s: replace %s: %w", r.Name, old, err)
			}
			inputs["replace:"+old] = h
		}
	}
	key, err := cas.Key(inputs)
	if err != nil {
		return nil, false, err
	}
	rec := &recipeRecord{}
	if ok, err := s.GetAction(key, rec); err != nil {
		return nil, false, err
	} else if ok {
		logctx.From(ctx).Info("recipe cached", "recipe", r.Name, "source", r.ModVersion())
		return rec, false, nil
	}

	work, err := s.TempDir("recipe-" + r.Name + "-")
	if err != nil {
		return nil, false, err
	}
	defer os.RemoveAll(work)
	out := filepath.Join(work, "out")
	mod := filepath.Join(work, "mod")
	for _, d := range []string{out, mod} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return nil, false, err
		}
	}
	start := time.Now()
	logctx.From(ctx).Info("recipe building", "recipe", r.Name, "source", r.ModVersion(), "binaries", strings.Join(r.BinaryNames(), ","))
	repo := opts.Spec.Dir
	if err := gobuild.Build(ctx, r, mod, out, gobuild.Options{Go: goCmd, Epoch: opts.Epoch, RepoDir: repo, Progress: opts.Progress, Label: label}); err != nil {
		return nil, false, err
	}
	rec.Binaries = map[string]cas.Digest{}
	for _, name := range r.BinaryNames() {
		d, _, err := s.PutFile(filepath.Join(out, name))
		if err != nil {
			return nil, false, fmt.Errorf("recipe %s: %w", r.Name, err)
		}
		if err := os.Chmod(s.BlobPath(d), 0o555); err != nil {
			return nil, false, fmt.Errorf("recipe %s: %w", r.Name, err)
		}
		rec.Binaries[name] = d
	}
	if err := s.PutAction(key, rec); err != nil {
		return nil, false, fmt.Errorf("recipe %s: %w", r.Name, err)
	}
	logctx.From(ctx).Info("recipe built", "recipe", r.Name, "source", r.ModVersion(), "took", time.Since(start).Round(time.Second))
	return rec, true, nil
}
