// Package gobuild builds the binaries of one Go recipe: main packages of a
// pinned module, fetched through the Go module proxy and built in a
// generated wrapper module, or main packages of this repository.
//
// Builds are static (CGO_ENABLED=0), -trimpath, without VCS stamps, with
// the recipe's ldflags, so the same recipe and Go version give the same
// bytes.
package gobuild

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"text/template"
	"time"

	"github.com/bootstick/bootstick/internal/command"

	"github.com/bootstick/bootstick/internal/progress"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/semver"

	"github.com/bootstick/bootstick/internal/recipes"
)

// Options say how to build.
type Options struct {
	// Go is the go command; "go" when empty.
	Go string
	// Epoch is the build date stamped through .BuildDate (SOURCE_DATE_EPOCH).
	Epoch time.Time
	// RepoDir is the folder local recipes are relative to.
	RepoDir string
	// Progress, when set, shows the build: packages compiled out of the
	// recipe's dependency count, and the package compiling now. Label
	// names the step ("recipe 1/5 kubernetes").
	Progress progress.Progress
	Label    string
}

// Flags are the build flags every recipe uses. They are part of every
// cache key, and the Makefile's GOFLAGS match them so that the tests share
// the build cache.
var Flags = []string{"-trimpath", "-buildvcs=false"}

// Env is the environment of every build, on top of the caller's.
func Env() []string {
	return []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64", "GOWORK=off", "GOFLAGS="}
}

// RecipeEnv is Env with the recipe's own settings: cgo, and the modules
// the checksum database is not asked about (the recipe's module and the
// modules its replace directives take from the proxy).
func RecipeEnv(r *recipes.GoRecipe) []string {
	env := Env()
	if r.Cgo {
		env = append(env, "CGO_ENABLED=1")
	}
	if r.UncheckedSum && r.Module != "" {
		unchecked := []string{r.Module}
		for _, target := range r.Replace {
			// GONOSUMDB matches whole path elements.
			if p, _, ok := strings.Cut(target, "@"); ok && p != r.Module && !strings.HasPrefix(p, r.Module+"/") {
				unchecked = append(unchecked, p)
			}
		}
		sort.Strings(unchecked[1:])
		env = append(env, "GONOSUMDB="+strings.Join(unchecked, ","))
	}
	return env
}

// Error is a failed recipe: it names the recipe and module@version, what
// went wrong, and the tail of the go command's output.
type Error struct {
	Recipe     string
	ModVersion string
	Stage      string // "resolving" or "building"
	Output     string
	Err        error
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("recipe %s: %s: %s failed: %v", e.Recipe, e.ModVersion, e.Stage, e.Err)
	if e.Output != "" {
		msg += "\n" + e.Output
	}
	if e.Stage == "resolving" {
		msg += "\ncheck the recipe's module and version in images/recipes.yaml (`go list -m -versions MODULE` lists the published ones)"
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// Build builds r's packages into outDir (which must exist), one binary per
// package named as r.BinaryNames says. workDir is a scratch folder.
func Build(ctx context.Context, r *recipes.GoRecipe, workDir, outDir string, opts Options) error {
	goCmd := opts.Go
	if goCmd == "" {
		goCmd = "go"
	}
	fail := func(stage, out string, err error) error {
		return &Error{Recipe: r.Name, ModVersion: r.ModVersion(), Stage: stage, Output: tail(out, 25), Err: err}
	}
	ldflags, err := Ldflags(r, opts.Epoch)
	if err != nil {
		return fail("building", "", err)
	}

	dir := workDir
	pkgs := r.Paths()
	if r.Local != "" {
		dir = filepath.Join(opts.RepoDir, r.Local)
	} else {
		gomod, gosum, err := wrapperGoMod(ctx, goCmd, r, workDir)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(workDir, "go.mod"), gomod, 0o644); err != nil {
			return fail("resolving", "", err)
		}
		if gosum != nil {
			if err := os.WriteFile(filepath.Join(workDir, "go.sum"), gosum, 0o644); err != nil {
				return fail("resolving", "", err)
			}
		}
		// go build -mod=mod resolves the rest of the module graph through
		// the proxy and records (and checks) every go.sum line.
	}

	abs, err := filepath.Abs(outDir)
	if err != nil {
		return fail("building", "", err)
	}
	args := append([]string{"build"}, Flags...)
	if r.Local == "" {
		args = append(args, "-mod=mod")
	}
	args = append(args, "-ldflags", strings.Join(append([]string{"-s", "-w"}, ldflags...), " "), "-o", abs+string(filepath.Separator))
	args = append(args, pkgs...)
	var onLine func(string)
	if opts.Progress != nil {
		total, err := countDeps(ctx, RecipeEnv(r), goCmd, dir, r.Local == "", pkgs)
		if err != nil {
			return fail("resolving", "", err)
		}
		label := opts.Label
		if label == "" {
			label = "recipe " + r.Name
		}
		progress.StartCount(opts.Progress, label, int64(total), "packages")
		defer opts.Progress.Done()
		args = append(args[:1], append([]string{"-v"}, args[1:]...)...)
		onLine = func(l string) {
			// -v names each package as it is compiled; other lines are
			// the go command's own ("go: downloading ...").
			if l == "" || strings.HasPrefix(l, "go: ") || strings.HasPrefix(l, "#") || strings.ContainsAny(l, " \t") {
				return
			}
			progress.Describe(opts.Progress, "compiling "+l)
			opts.Progress.Add(1)
		}
	}
	if out, err := runLines(ctx, RecipeEnv(r), goCmd, dir, onLine, args...); err != nil {
		return fail("building", out, err)
	}
	// Each binary gets its recipe name; no two packages of a recipe share a
	// go build name (the spec checks), so renames cannot collide.
	names := r.BinaryNames()
	for i, p := range r.Packages {
		built := filepath.Join(abs, r.GoBuildName(p))
		if fi, err := os.Stat(built); err != nil || !fi.Mode().IsRegular() {
			return fail("building", "", fmt.Errorf("go build wrote no binary for %s: is it a main package?", p.Path))
		}
		if names[i] != r.GoBuildName(p) {
			if err := os.Rename(built, filepath.Join(abs, names[i])); err != nil {
				return fail("building", "", err)
			}
		}
	}
	return nil
}

// Ldflags expands the recipe's ldflags templates.
func Ldflags(r *recipes.GoRecipe, epoch time.Time) ([]string, error) {
	data := struct{ Version, Major, Minor, BuildDate string }{
		Version:   r.Version,
		BuildDate: epoch.UTC().Format(time.RFC3339),
	}
	if semver.IsValid(r.Version) {
		mm := strings.Split(strings.TrimPrefix(semver.MajorMinor(r.Version), "v"), ".")
		data.Major, data.Minor = mm[0], mm[1]
	}
	out := make([]string, 0, len(r.Ldflags))
	for _, l := range r.Ldflags {
		t, err := template.New("ldflags").Option("missingkey=error").Parse(l)
		if err != nil {
			return nil, fmt.Errorf("ldflags %q: %w", l, err)
		}
		var b bytes.Buffer
		if err := t.Execute(&b, data); err != nil {
			return nil, fmt.Errorf("ldflags %q: %w", l, err)
		}
		out = append(out, b.String())
	}
	return out, nil
}

// downloadInfo is the part of `go mod download -json` we read.
type downloadInfo struct {
	Path, Version, GoMod, Dir, Error string
}

// wrapperGoMod makes the go.mod of a module that requires the pinned
// module, plus the recipe's replacements, and the go.sum it starts from
// when the recipe takes the module's own (nil otherwise).
func wrapperGoMod(ctx context.Context, goCmd string, r *recipes.GoRecipe, workDir string) ([]byte, []byte, error) {
	fail := func(out string, err error) ([]byte, []byte, error) {
		return nil, nil, &Error{Recipe: r.Name, ModVersion: r.ModVersion(), Stage: "resolving", Output: tail(out, 10), Err: err}
	}
	var upstreamMod, upstreamDir string
	if local, ok := r.Replace[r.Module]; ok && (filepath.IsAbs(local) || strings.HasPrefix(local, ".")) {
		// The module itself comes from a local folder: nothing to fetch.
		upstreamMod = filepath.Join(local, "go.mod")
		upstreamDir = local
	} else {
		// `go mod download` of one module needs no main module; run it
		// in workDir before go.mod exists there.
		js, out, err := output(ctx, RecipeEnv(r), goCmd, workDir, "mod", "download", "-json", r.Module+"@"+r.Version)
		var info downloadInfo
		if jerr := json.Unmarshal([]byte(js), &info); jerr == nil && info.Error != "" {
			return fail("", fmt.Errorf("the module proxy refused it: %s", info.Error))
		}
		if err != nil {
			return fail(out, err)
		}
		upstreamMod, upstreamDir = info.GoMod, info.Dir
	}
	upstream, err := os.ReadFile(upstreamMod)
	if err != nil {
		return fail("", err)
	}
	up, err := modfile.Parse(upstreamMod, upstream, nil)
	if err != nil {
		return fail("", fmt.Errorf("parsing its go.mod: %w", err))
	}

	f := &modfile.File{}
	if err := f.AddModuleStmt("bootstick.local/recipe/" + r.Name); err != nil {
		return fail("", err)
	}
	goVersion := "1.22"
	if up.Go != nil {
		goVersion = up.Go.Version
	}
	if err := f.AddGoStmt(goVersion); err != nil {
		return fail("", err)
	}
	if err := f.AddRequire(r.Module, r.Version); err != nil {
		return fail("", err)
	}
	if r.ReplaceLocal {
		n := 0
		for _, rep := range up.Replace {
			if rep.New.Version == "" && strings.HasPrefix(rep.New.Path, "./") {
				if err := f.AddReplace(rep.Old.Path, "", rep.Old.Path, r.Version); err != nil {
					return fail("", err)
				}
				n++
			}
		}
		if n == 0 {
			return fail("", fmt.Errorf("replaceLocal is set, but its go.mod replaces no module with a ./folder"))
		}
	}
	if r.ReplaceStaging {
		staging := "v0" + strings.TrimPrefix(r.Version, semver.Major(r.Version))
		n := 0
		for _, rep := range up.Replace {
			if strings.HasPrefix(rep.New.Path, "./staging/") {
				if err := f.AddReplace(rep.Old.Path, "", rep.Old.Path, staging); err != nil {
					return fail("", err)
				}
				n++
			}
		}
		if n == 0 {
			return fail("", fmt.Errorf("replaceStaging is set, but its go.mod replaces no module with ./staging/..."))
		}
	}
	olds := make([]string, 0, len(r.Replace))
	for old := range r.Replace {
		olds = append(olds, old)
	}
	sort.Strings(olds)
	for _, old := range olds {
		newPath, newVersion := r.Replace[old], ""
		if p, v, ok := strings.Cut(newPath, "@"); ok {
			newPath, newVersion = p, v
		}
		if err := f.AddReplace(old, "", newPath, newVersion); err != nil {
			return fail("", fmt.Errorf("replace %s: %w", old, err))
		}
	}
	f.Cleanup()
	gomod, err := f.Format()
	if err != nil {
		return fail("", err)
	}
	if !r.UpstreamSum {
		return gomod, nil, nil
	}
	gosum, err := os.ReadFile(filepath.Join(upstreamDir, "go.sum"))
	if err != nil {
		return fail("", fmt.Errorf("upstreamSum is set: %w", err))
	}
	return gomod, gosum, nil
}

// countDeps counts the packages a build of pkgs compiles at most.
func countDeps(ctx context.Context, env []string, goCmd, dir string, modMod bool, pkgs []string) (int, error) {
	args := append([]string{"list"}, Flags...)
	if modMod {
		args = append(args, "-mod=mod")
	}
	args = append(append(args, "-deps", "-f", "{{.ImportPath}}"), pkgs...)
	list, out, err := output(ctx, env, goCmd, dir, args...)
	if err != nil {
		return 0, fmt.Errorf("listing the packages to build: %w\n%s", err, tail(out, 15))
	}
	n := 0
	for _, l := range strings.Split(list, "\n") {
		if l != "" {
			n++
		}
	}
	return n, nil
}

// runLines is run, with each line of output also handed to onLine (when
// set) as it comes.
func runLines(ctx context.Context, env []string, goCmd, dir string, onLine func(string), args ...string) (string, error) {
	if onLine == nil {
		return run(ctx, env, goCmd, dir, args...)
	}
	cmd := exec.CommandContext(ctx, goCmd, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	pr, pw := io.Pipe()
	var b bytes.Buffer
	cmd.Stdout = pw
	cmd.Stderr = pw
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			b.WriteString(sc.Text() + "\n")
			onLine(strings.TrimSpace(sc.Text()))
		}
		io.Copy(io.Discard, pr)
	}()
	err := cmd.Run()
	pw.Close()
	<-done
	if ctx.Err() != nil {
		return b.String(), ctx.Err()
	}
	return b.String(), err
}

func run(ctx context.Context, env []string, goCmd, dir string, args ...string) (string, error) {
	_, all, err := output(ctx, env, goCmd, dir, args...)
	return all, err
}

// output runs the go command and returns its standard output alone (the
// JSON or list asked for, never go's "go: downloading" chatter on standard
// error), and the whole output for an error's tail.
func output(ctx context.Context, env []string, goCmd, dir string, args ...string) (stdout, all string, err error) {
	cmd := exec.CommandContext(ctx, goCmd, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var o, b bytes.Buffer
	cmd.Stdout = io.MultiWriter(&o, &b)
	cmd.Stderr = &b
	err = cmd.Run()
	if ctx.Err() != nil {
		err = ctx.Err()
	}
	return o.String(), b.String(), err
}

// tail keeps the last n lines of the go command's output, without its
// "go: downloading" chatter.
func tail(s string, n int) string {
	var keep []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(l, "go: downloading ") {
			keep = append(keep, l)
		}
	}
	return command.Tail(strings.Join(keep, "\n"), n)
}

// ModuleDir fetches one module (module@version) through the module proxy,
// checked against the checksum database as any build is, and returns the
// folder of the module cache that holds it (read-only).
func ModuleDir(ctx context.Context, goCmd, modVersion string) (string, error) {
	work, err := os.MkdirTemp("", "bootstick-moddl-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	js, out, err := output(ctx, Env(), goCmd, work, "mod", "download", "-json", modVersion)
	var info downloadInfo
	if jerr := json.Unmarshal([]byte(js), &info); jerr == nil && info.Error != "" {
		return "", fmt.Errorf("fetching module %s: the module proxy refused it: %s", modVersion, info.Error)
	}
	if err != nil {
		return "", fmt.Errorf("fetching module %s: %w\n%s", modVersion, err, tail(out, 10))
	}
	if info.Dir == "" {
		return "", fmt.Errorf("fetching module %s: go mod download named no folder", modVersion)
	}
	return info.Dir, nil
}
