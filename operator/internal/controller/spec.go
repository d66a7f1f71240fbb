package controller

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cellstore/cellstore/operator/api/v1alpha1"
	"github.com/cellstore/cellstore/operator/internal/master"
	"github.com/cellstore/cellstore/operator/internal/resources"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ReasonStorageExpansionRefused: the shared claim could not grow to spec.storage.volume.size; the
// cluster goes on with the claim as it is.
const ReasonStorageExpansionRefused = "StorageExpansionRefused"

// Condition reasons.
const (
	ReasonAsExpected           = "AsExpected"
	ReasonServing              = "Serving"
	ReasonComplete             = "Complete"
	ReasonStorageClaimMissing  = "StorageClaimMissing"
	ReasonStorageNotShared     = "StorageNotShared"
	ReasonStorageClassMissing  = "StorageClassMissing"
	ReasonStoragePending       = "StoragePending"
	ReasonStorageReady         = "StorageReady"
	ReasonNotChecked           = "NotChecked"
	ReasonMemoryBudgetExceeded = "MemoryBudgetExceeded"
	ReasonInvalidSpec          = "InvalidSpec"
	ReasonVersionSkew          = "VersionSkewRefused"
	ReasonEngineTooOld         = "EngineTooOld"
	ReasonApplyFailed          = "ApplyFailed"
	ReasonConflict             = "Conflict"
	ReasonMasterUnreachable    = "MasterUnreachable"
	ReasonNoActiveMaster       = "NoActiveMaster"
	ReasonNoRegionServer       = "NoRegionServerReady"
	ReasonWaitingForPods       = "WaitingForPods"
	ReasonRestartPending       = "RestartPending"
	ReasonRollingRestart       = "RollingRestart"
	ReasonScalingIn            = "ScalingIn"
	ReasonDrainTimedOut        = "DrainTimedOut"
	ReasonPodNotReady          = "PodNotReady"
)

// specProblem is a spec the operator refuses (beyond what the CRD schema catches).
type specProblem struct {
	Reason  string
	Message string
}

// checkSpec checks what the CRD's rules cannot (S3 support, memory with defaults filled in and
// hugepage rounding, duplicate quotas) and returns the region servers' memory plan.
func checkSpec(c *v1alpha1.StoreCluster) (resources.MemoryPlan, *specProblem) {
	st := c.Spec.Storage
	if st.ExistingClaim == nil && st.Volume == nil && st.S3 == nil {
		return resources.MemoryPlan{}, &specProblem{ReasonInvalidSpec, "spec.storage sets no storage: set existingClaim, volume or s3"}
	}
	plan, err := resources.PlanRegionServerMemory(c.Spec.RegionServers.Memory)
	if err != nil {
		reason := ReasonInvalidSpec
		var me *resources.MemoryError
		if errors.As(err, &me) {
			reason = ReasonMemoryBudgetExceeded
		}
		return plan, &specProblem{reason, err.Error()}
	}
	if _, err := master.QuotasFromSpec(c.Spec.Quotas); err != nil {
		return plan, &specProblem{ReasonInvalidSpec, err.Error()}
	}
	return plan, nil
}

// templateChange is one pod template change recorded on a StatefulSet (restart-history annotation).
type templateChange struct {
	From    string      `json:"from"`
	To      string      `json:"to"`
	Changed []string    `json:"changed"`
	At      metav1.Time `json:"at"`
}

const maxHistory = 10

func parseHistory(s string) []templateChange {
	var h []templateChange
	if s == "" || json.Unmarshal([]byte(s), &h) != nil {
		return nil
	}
	return h
}

// restartReason says why a pod (running the template with hash podHash) must restart to reach
// the StatefulSet's current template, from the recorded history.
func restartReason(sts *appsv1.StatefulSet, podHash string) string {
	current := sts.Spec.Template.Annotations[resources.AnnotationTemplateHash]
	if podHash == "" {
		return "pod template changed (the pod carries no template hash)"
	}
	hist := parseHistory(sts.Annotations[resources.AnnotationRestartHistory])
	cur := podHash
	seen := map[string]bool{}
	var paths []string
	for _, e := range hist {
		if e.From == cur {
			for _, p := range e.Changed {
				if !seen[p] {
					seen[p] = true
					paths = append(paths, p)
				}
			}
			cur = e.To
		}
	}
	if cur != current || len(paths) == 0 {
		return fmt.Sprintf("pod template changed since revision %s (the changed fields were not recorded)", podHash)
	}
	return "pod template changed: " + strings.Join(paths, ", ")
}

// Rollout actions and steps.
const (
	ActionRestart = "Restart"
	ActionScaleIn = "ScaleIn"

	StepDraining     = "Draining"
	StepWaitingReady = "WaitingReady"
	StepRemoving     = "Removing"
)

// rolloutState is the step of a rolling restart or scale-in under way in one group, kept in the
// group StatefulSet's cellstore.io/rollout annotation so the operator resumes it after a restart.
type rolloutState struct {
	Pod    string    `json:"pod"`
	UID    types.UID `json:"uid,omitempty"`
	Action string    `json:"action"`
	Step   string    `json:"step"`
	// Since is when the step began; a drain's timeout counts from it.
	Since time.Time `json:"since"`
	// Reason says why the pod restarts or goes.
	Reason string `json:"reason"`
	// BlockedReason and Blocked say why the step does not advance.
	BlockedReason string `json:"blockedReason,omitempty"`
	Blocked       string `json:"blocked,omitempty"`
}

func parseRollout(sts *appsv1.StatefulSet) *rolloutState {
	if sts == nil {
		return nil
	}
	s := sts.Annotations[resources.AnnotationRollout]
	if s == "" {
		return nil
	}
	var st rolloutState
	if json.Unmarshal([]byte(s), &st) != nil || st.Pod == "" {
		return nil
	}
	return &st
}

// podOrdinal is the ordinal of a StatefulSet pod (-1 if the name has none).
func podOrdinal(name string) int {
	i := strings.LastIndexByte(name, '-')
	if i < 0 {
		return -1
	}
	n, err := strconv.Atoi(name[i+1:])
	if err != nil || n < 0 {
		return -1
	}
	return n
}

func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// revisionKnown says whether a StatefulSet's status.updateRevision describes its current template:
// the StatefulSet controller has observed the latest generation.
func revisionKnown(sts *appsv1.StatefulSet) bool {
	return sts != nil && sts.Status.UpdateRevision != "" && sts.Status.ObservedGeneration >= sts.Generation
}

func podRevision(p *corev1.Pod) string { return p.Labels[appsv1.ControllerRevisionHashLabelKey] }

// groupPods returns the pods of one group, by ordinal.
func groupPods(c *v1alpha1.StoreCluster, pods []corev1.Pod, g resources.Group) []*corev1.Pod {
	var out []*corev1.Pod
	for i := range pods {
		p := &pods[i]
		if p.Labels[resources.LabelComponent] == string(g) && p.Labels[resources.LabelInstance] == c.Name && podOrdinal(p.Name) >= 0 {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return podOrdinal(out[i].Name) < podOrdinal(out[j].Name) })
	return out
}

func findPod(pods []*corev1.Pod, name string) *corev1.Pod {
	for _, p := range pods {
		if p.Name == name {
			return p
		}
	}
	return nil
}

func humanDuration(d time.Duration) string {
	return d.Round(time.Second).String()
}
