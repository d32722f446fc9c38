// Package daemon starts gpud on simulated devices for tests and the conformance runner.
package daemon

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Binary returns the gpud binary to run: $GPUD_BIN when set, else target/debug/gpud under
// repoRoot. The error says what is missing.
func Binary(repoRoot string) (string, error) {
	if b := os.Getenv("GPUD_BIN"); b != "" {
		if _, err := os.Stat(b); err != nil {
			return "", fmt.Errorf("GPUD_BIN=%s: %v", b, err)
		}
		return b, nil
	}
	b := filepath.Join(repoRoot, "target", "debug", "gpud")
	if _, err := os.Stat(b); err != nil {
		abs, _ := filepath.Abs(b)
		return "", fmt.Errorf("no gpud binary: GPUD_BIN is not set and %s does not exist (build it with `cargo build -p gpud`, or set GPUD_BIN)", abs)
	}
	return b, nil
}

// Daemon is a running gpud.
type Daemon struct {
	// Dir holds the socket, config, state directory and log.
	Dir string
	// Socket is the daemon's socket path.
	Socket string
	cmd    *exec.Cmd
	exited chan struct{}
	log    string
	args   []string
	bin    string
}

// Start runs bin --simulate simulate in dir (which must exist and be traversable by the
// clients), with config as its config file's text, and waits until its socket accepts.
func Start(bin, dir, simulate, config string) (*Daemon, error) {
	socket := filepath.Join(dir, "gpud.sock")
	configPath := filepath.Join(dir, "gpud.toml")
	if err := os.WriteFile(configPath, []byte(config), 0o644); err != nil {
		return nil, err
	}
	d := &Daemon{
		Dir:    dir,
		Socket: socket,
		log:    filepath.Join(dir, "gpud.log"),
		bin:    bin,
		args: []string{
			"--simulate", simulate,
			"--socket", socket,
			"--headroom", "0",
			"--state-dir", filepath.Join(dir, "state"),
			"--config", configPath,
			"--dbus", "none",
			"--log", "debug",
		},
	}
	if err := d.spawn(); err != nil {
		return nil, err
	}
	return d, nil
}

func (d *Daemon) spawn() error {
	log, err := os.OpenFile(d.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command(d.bin, d.args...)
	cmd.Stdout = log
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("cannot start %s: %v", d.bin, err)
	}
	d.cmd = cmd
	d.exited = make(chan struct{})
	go func() {
		cmd.Wait()
		close(d.exited)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.Dial("unix", d.Socket); err == nil {
			c.Close()
			return nil
		}
		select {
		case <-d.exited:
			return fmt.Errorf("gpud exited at start; log:\n%s", d.Log())
		case <-time.After(10 * time.Millisecond):
		}
	}
	d.Stop()
	return fmt.Errorf("gpud did not accept on %s within 10 s; log:\n%s", d.Socket, d.Log())
}

// PID returns the daemon's process id.
func (d *Daemon) PID() int { return d.cmd.Process.Pid }

// Log returns the daemon's log so far.
func (d *Daemon) Log() string {
	b, _ := os.ReadFile(d.log)
	return string(b)
}

// Stop kills the daemon (SIGKILL) and waits for it.
func (d *Daemon) Stop() {
	d.cmd.Process.Kill()
	<-d.exited
}

// Terminate sends SIGTERM and waits up to limit for the daemon to exit.
func (d *Daemon) Terminate(limit time.Duration) error {
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case <-d.exited:
		return nil
	case <-time.After(limit):
		return errors.New("gpud did not exit after SIGTERM")
	}
}

// Restart kills the daemon and starts it again with the same arguments and state directory.
func (d *Daemon) Restart() error {
	d.Stop()
	return d.spawn()
}

// MkdirTemp makes a fresh directory that other users may traverse (a client dropped to
// another uid must reach the socket).
func MkdirTemp(prefix string) (string, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", err
	}
	return dir, os.Chmod(dir, 0o755)
}

// ConfigText joins config lines into a config file's text.
func ConfigText(lines []string) string {
	if len(lines) == 0 {
		return ""
	}
	return strings.Join(lines, "\n") + "\n"
}
