package bench

import (
	"bufio"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
	"time"
)

// Meta describes the machine and build a run measured.
type Meta struct {
	Date       time.Time
	Duration   time.Duration
	Command    string
	NProc      string // `nproc`
	NumCPU     int
	GOMAXPROCS int
	CPUModel   string
	GoVersion  string
	OSArch     string
	Versions   map[string]string // module path → version
	// LoadStart and LoadEnd are /proc/loadavg at the start and end: on a
	// shared machine they say how much else was running.
	LoadStart, LoadEnd string
	// Merged lists later runs whose tasks replaced or joined this run's.
	Merged []string `json:",omitempty"`
}

// CollectMeta reads the machine and the build.
func CollectMeta(command string) Meta {
	m := Meta{
		Date:       time.Now().UTC(),
		Command:    command,
		NumCPU:     runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		CPUModel:   cpuModel(),
		GoVersion:  runtime.Version(),
		OSArch:     runtime.GOOS + "/" + runtime.GOARCH,
		Versions:   map[string]string{},
		LoadStart:  LoadAvg(),
	}
	if out, err := exec.Command("nproc").Output(); err == nil {
		m.NProc = strings.TrimSpace(string(out))
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			v := d.Version
			if d.Replace != nil {
				v = d.Version + " => " + d.Replace.Path
				if d.Replace.Version != "" {
					v += " " + d.Replace.Version
				}
			}
			m.Versions[d.Path] = v
		}
		for _, st := range bi.Settings {
			if st.Key == "-tags" && st.Value != "" {
				m.Command = strings.Replace(m.Command, "qbench", "qbench (built with -tags "+st.Value+")", 1)
			}
		}
	}
	return m
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// LoadAvg returns the 1, 5 and 15 minute load averages from /proc/loadavg.
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
