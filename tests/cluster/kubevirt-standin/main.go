// kubevirt-standin stands in for the parts of KubeVirt a drain meets, with real API machinery
// and no hypervisor, for the evacuation end-to-end tests (tests/evacuation.rs):
//
//   - a validating admission webhook on pods/eviction that answers for virt-launcher pods (label
//     kubevirt.io=virt-launcher, controlled by a VirtualMachineInstance) as virt-api's pod
//     eviction admitter does: the texts, the 429 and the VMI's status.evacuationNodeName mark;
//   - its migration controller: on an evacuation it creates a VirtualMachineInstanceMigration
//     (label kubevirt.io/vmi-name), sets its phase, marks the launcher pod with the descheduler's
//     eviction-in-progress annotation, and after --migration-seconds finishes the migration and
//     deletes the launcher pod;
//   - a responder of the descheduler's contract for pods annotated
//     descheduler.alpha.kubernetes.io/request-evict-only: a 429 saying "Eviction triggered
//     evacuation", the in-progress annotation, the pod deleted after the same delay.
//   - virt-api's subresources.kubevirt.io/v1, served behind an APIService on the API server's
//     aggregation layer: its discovery (only virtualmachineinstances/evacuate/cancel) and the
//     evacuate/cancel PUT, which clears the VMI's status.evacuationNodeName as virt-api does and
//     is printed with the body it received.
//
// Every other pod's eviction is allowed. Each admission and step is printed as one JSON line.
// Test tooling only; built by build-kubevirt-standin.sh from the Go module proxy.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

const (
	evictOnly  = "descheduler.alpha.kubernetes.io/request-evict-only"
	inProgress = "descheduler.alpha.kubernetes.io/eviction-in-progress"
	// A pod's own migration time (a Go duration), overriding --migration-time.
	migrationTime = "e2e.medik8s.io/migration-time"
)

var (
	vmis       = schema.GroupVersionResource{Group: "kubevirt.io", Version: "v1", Resource: "virtualmachineinstances"}
	migrations = schema.GroupVersionResource{Group: "kubevirt.io", Version: "v1", Resource: "virtualmachineinstancemigrations"}
)

type standin struct {
	core  kubernetes.Interface
	dyn   dynamic.Interface
	delay time.Duration
	mu    sync.Mutex
}

// delayFor is how long the migration (or evacuation) of pod takes.
func (s *standin) delayFor(pod *corev1.Pod) time.Duration {
	if d, err := time.ParseDuration(pod.Annotations[migrationTime]); err == nil {
		return d
	}
	return s.delay
}

func say(event string, fields map[string]any) {
	fields["event"] = event
	fields["time"] = time.Now().UTC().Format(time.RFC3339Nano)
	line, _ := json.Marshal(fields)
	fmt.Println(string(line))
}

func allowed() *admissionv1.AdmissionResponse { return &admissionv1.AdmissionResponse{Allowed: true} }

// denied is virt-api's refusal: 429 with the message.
func denied(message string) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Allowed: false, Result: &metav1.Status{Message: message, Code: http.StatusTooManyRequests}}
}

func vmiOf(pod *corev1.Pod) string {
	for _, o := range pod.OwnerReferences {
		if o.Kind == "VirtualMachineInstance" && o.Controller != nil && *o.Controller {
			return o.Name
		}
	}
	return ""
}

func migratable(vmi *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(vmi.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "LiveMigratable" && m["status"] == "True" {
			return true
		}
	}
	return false
}

func (s *standin) admit(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	pod, err := s.core.CoreV1().Pods(req.Namespace).Get(ctx, req.Name, metav1.GetOptions{})
	if err != nil {
		return allowed()
	}
	dryRun := req.DryRun != nil && *req.DryRun
	if pod.Labels["kubevirt.io"] == "virt-launcher" {
		if name := vmiOf(pod); name != "" {
			return s.launcher(ctx, pod, name, dryRun)
		}
	}
	if _, ok := pod.Annotations[evictOnly]; ok {
		return s.evictOnly(ctx, pod, dryRun)
	}
	return allowed()
}

// launcher answers as virt-api's pod eviction admitter (pod-eviction-admitter.go).
func (s *standin) launcher(ctx context.Context, pod *corev1.Pod, name string, dryRun bool) *admissionv1.AdmissionResponse {
	api := s.dyn.Resource(vmis).Namespace(pod.Namespace)
	vmi, err := api.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return denied(fmt.Sprintf("kubevirt failed getting the vmi: %v", err))
	}
	strategy, _, _ := unstructured.NestedString(vmi.Object, "spec", "evictionStrategy")
	mark := false
	switch strategy {
	case "LiveMigrate":
		if !migratable(vmi) {
			return denied(fmt.Sprintf("VMI %s is configured with an eviction strategy but is not live-migratable", name))
		}
		mark = true
	case "LiveMigrateIfPossible":
		mark = migratable(vmi)
	case "External":
		mark = true
	}
	if !mark {
		return allowed()
	}
	const evictionFmt = "Eviction triggered evacuation of VMI \"%s/%s\""
	if node, _, _ := unstructured.NestedString(vmi.Object, "status", "evacuationNodeName"); node != "" {
		return denied(fmt.Sprintf("Evacuation in progress: "+evictionFmt, pod.Namespace, name))
	}
	if node, _, _ := unstructured.NestedString(vmi.Object, "status", "nodeName"); node != pod.Spec.NodeName {
		return denied("Eviction request for target Pod")
	}
	if !dryRun {
		patch := fmt.Sprintf(`[{"op":"add","path":"/status/evacuationNodeName","value":%q}]`, pod.Spec.NodeName)
		if _, err := api.Patch(ctx, name, types.JSONPatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
			return denied(fmt.Sprintf("kubevirt failed marking the vmi for eviction: %v", err))
		}
		say("evacuation", map[string]any{"vmi": pod.Namespace + "/" + name, "pod": pod.Name, "node": pod.Spec.NodeName})
		go s.migrate(pod.DeepCopy(), name)
	}
	return denied(fmt.Sprintf(evictionFmt, pod.Namespace, name))
}

// migrate is the migration controller's part: a migration object through its phases, the
// source pod marked in progress, and gone once the migration succeeded.
func (s *standin) migrate(pod *corev1.Pod, vmi string) {
	ctx := context.Background()
	api := s.dyn.Resource(migrations).Namespace(pod.Namespace)
	m := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
		"metadata": map[string]any{"generateName": "kubevirt-evacuation-", "labels": map[string]any{"kubevirt.io/vmi-name": vmi}},
		"spec":     map[string]any{"vmiName": vmi},
	}}
	created, err := api.Create(ctx, m, metav1.CreateOptions{})
	if err != nil {
		say("error", map[string]any{"step": "create migration", "error": err.Error()})
		return
	}
	name := created.GetName()
	setPhase := func(phase string) {
		patch := fmt.Sprintf(`{"status":{"phase":%q,"migrationState":{"startTimestamp":%q}}}`, phase, created.GetCreationTimestamp().UTC().Format(time.RFC3339))
		if _, err := api.Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
			say("error", map[string]any{"step": "migration " + phase, "error": err.Error()})
		}
		say("migration", map[string]any{"vmi": pod.Namespace + "/" + vmi, "migration": name, "phase": phase})
	}
	setPhase("Scheduling")
	s.markInProgress(ctx, pod, "kubevirt")
	setPhase("Running")
	time.Sleep(s.delayFor(pod))
	setPhase("Succeeded")
	patch := `{"status":{"evacuationNodeName":null,"nodeName":"migrated"}}`
	if _, err := s.dyn.Resource(vmis).Namespace(pod.Namespace).Patch(ctx, vmi, types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
		say("error", map[string]any{"step": "vmi migrated", "error": err.Error()})
	}
	s.remove(ctx, pod)
}

// evictOnly is a responder of the descheduler's contract.
func (s *standin) evictOnly(ctx context.Context, pod *corev1.Pod, dryRun bool) *admissionv1.AdmissionResponse {
	if _, ok := pod.Annotations[inProgress]; ok {
		// Any refusal of ours: the annotation says what it means.
		return denied(fmt.Sprintf("pod %s/%s is being moved", pod.Namespace, pod.Name))
	}
	if !dryRun {
		s.markInProgress(ctx, pod, "standin")
		say("evacuation", map[string]any{"pod": pod.Namespace + "/" + pod.Name, "node": pod.Spec.NodeName})
		go func() {
			time.Sleep(s.delayFor(pod))
			s.remove(context.Background(), pod.DeepCopy())
		}()
	}
	return denied(fmt.Sprintf("Eviction triggered evacuation of pod %s/%s", pod.Namespace, pod.Name))
}

func (s *standin) markInProgress(ctx context.Context, pod *corev1.Pod, by string) {
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, inProgress, by)
	if _, err := s.core.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		say("error", map[string]any{"step": "mark in progress", "error": err.Error()})
	}
}

func (s *standin) remove(ctx context.Context, pod *corev1.Pod) {
	zero := int64(0)
	uid := pod.UID
	err := s.core.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil {
		say("error", map[string]any{"step": "delete pod", "error": err.Error()})
		return
	}
	say("deleted", map[string]any{"pod": pod.Namespace + "/" + pod.Name})
}

func (s *standin) serve(w http.ResponseWriter, r *http.Request) {
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
		http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
		return
	}
	resp := s.admit(r.Context(), review.Request)
	resp.UID = review.Request.UID
	msg := ""
	if resp.Result != nil {
		msg = resp.Result.Message
	}
	say("admission", map[string]any{"pod": review.Request.Namespace + "/" + review.Request.Name, "allowed": resp.Allowed, "message": msg})
	review.Response = resp
	review.Request = nil
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&review)
}

const subresources = "/apis/subresources.kubevirt.io/v1"

// discovery lists the one subresource served (virt-api lists more).
func discovery(w http.ResponseWriter, r *http.Request) {
	list := metav1.APIResourceList{
		TypeMeta:     metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
		GroupVersion: "subresources.kubevirt.io/v1",
		APIResources: []metav1.APIResource{{Name: "virtualmachineinstances/evacuate/cancel", Namespaced: true, Kind: "VirtualMachineInstance", Verbs: []string{"update"}}},
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&list)
}

// cancel serves PUT .../namespaces/<ns>/virtualmachineinstances/<name>/evacuate/cancel.
func (s *standin) cancel(w http.ResponseWriter, r *http.Request) {
	ns, name := r.PathValue("ns"), r.PathValue("name")
	body := map[string]any{}
	_ = json.NewDecoder(r.Body).Decode(&body)
	say("cancel", map[string]any{"vmi": ns + "/" + name, "method": r.Method, "user": r.Header.Get("X-Remote-User"), "body": body})
	patch := `{"status":{"evacuationNodeName":null}}`
	if _, err := s.dyn.Resource(vmis).Namespace(ns).Patch(r.Context(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
		say("error", map[string]any{"step": "cancel evacuation", "error": err.Error()})
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the API server")
	addr := flag.String("addr", "127.0.0.1:0", "address of the webhook (HTTPS)")
	cert := flag.String("cert", "", "serving certificate (PEM)")
	key := flag.String("key", "", "serving key (PEM)")
	delay := flag.Duration("migration-time", 10*time.Second, "how long a migration (an evacuation) takes")
	flag.Parse()
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	config.QPS, config.Burst = 100, 200
	s := &standin{core: kubernetes.NewForConfigOrDie(config), dyn: dynamic.NewForConfigOrDie(config), delay: *delay}
	mux := http.NewServeMux()
	mux.HandleFunc("/evict", s.serve)
	mux.HandleFunc("GET "+subresources, discovery)
	mux.HandleFunc("PUT "+subresources+"/namespaces/{ns}/virtualmachineinstances/{name}/evacuate/cancel", s.cancel)
	say("listening", map[string]any{"addr": *addr})
	if err := http.ListenAndServeTLS(*addr, *cert, *key, mux); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
