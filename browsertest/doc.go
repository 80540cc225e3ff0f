// Package browsertest drives the queue's dashboard (package
// github.com/queuekit/queue/dashboard) in a real headless Chromium with
// chromedp. It is a module of its own so that the browser driver never
// becomes a requirement of the core module. It holds only tests.
//
// The tests need Debian's chromium package (or CHROMIUM set to a Chromium
// or Chrome binary). Without one they skip and say so, except under
// CI=true, where they fail; scripts/test.sh installs chromium under CI.
//
// go test -run TestScreenshot -screenshot ../docs/dashboard.png saves the
// screenshot the README and docs/OPERATIONS.md show, made from the same
// demo data every time (only the times and the chart's lines differ).
package browsertest
