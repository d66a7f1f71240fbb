// Package charts holds the tests of the Helm charts in this directory (helm lint, and assertions on
// the objects `helm template` renders for default and non-default values).
package charts
