package server

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hvkube/hvkube/internal/api"
)

// The admission webhook: with --store kubernetes, a write that goes
// straight to the Kubernetes API server (kubectl apply, a controller of
// someone else's) meets the rules hvkube's own API enforces, by the same
// code and with the same error text. The API server calls it for hvkube's
// kinds (deploy/webhook.yaml, hvkube webhook-config); it answers an
// AdmissionReview: allowed, or refused naming the field.

// WebhookPath is where the admission webhook answers.
const WebhookPath = "/admission/validate"

// maxReview bounds an AdmissionReview's body: two objects.
const maxReview = 8 << 20

// AdmissionHandler serves the admission webhook. It takes nothing but
// AdmissionReviews and reads no store: it needs no token (the API server
// reaches it over TLS, and all it can learn is whether an object is
// valid).
func (s *Server) AdmissionHandler() http.Handler {
	m := http.NewServeMux()
	m.HandleFunc("POST "+WebhookPath, s.admission)
	return m
}

func (s *Server) admission(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxReview))
	if err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Errorf("admission review: %w", err))
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
		writeError(w, http.StatusBadRequest, errors.New("not an AdmissionReview of admission.k8s.io/v1 with a request"))
		return
	}
	req := review.Request
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	if err := s.review(req); err != nil {
		resp.Allowed = false
		resp.Result = &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusUnprocessableEntity,
			Reason: metav1.StatusReasonInvalid, Message: err.Error()}
		if f := api.FieldOf(err); f != "" {
			resp.Result.Details = &metav1.StatusDetails{Name: req.Name, Kind: req.Kind.Kind,
				Causes: []metav1.StatusCause{{Type: metav1.CauseTypeFieldValueInvalid, Field: f, Message: err.Error()}}}
		}
	}
	review.Request, review.Response = nil, resp
	writeJSON(w, http.StatusOK, review)
}

// review applies the REST API's admission to the request's object: the
// same defaults, validation, host paths, MCP tools and egress rules, on
// a copy (nothing is changed), and on an update of the spec the fields
// that may not change.
func (s *Server) review(req *admissionv1.AdmissionRequest) error {
	if req.SubResource != "" || (req.Operation != admissionv1.Create && req.Operation != admissionv1.Update) {
		return nil
	}
	if req.Kind.Group != "hvkube.io" {
		return nil
	}
	o, err := fromReview(req.Kind.Kind, req.Object.Raw)
	if err != nil {
		return err
	}
	specChanged := true
	var old api.Object
	if req.Operation == admissionv1.Update {
		if old, err = fromReview(req.Kind.Kind, req.OldObject.Raw); err != nil {
			return err
		}
		ob, _ := json.Marshal(old.GetSpec())
		nb, _ := json.Marshal(o.GetSpec())
		specChanged = string(ob) != string(nb)
	}
	if o.GetMeta().DeletionTimestamp != nil && !specChanged {
		return nil // going: what changes is its finalizers
	}
	if sec, ok := o.(*api.Secret); ok && (len(sec.Spec.Data) > 0 || len(sec.Spec.StringData) > 0) {
		// Written here, the values would be stored as they are.
		return api.Invalid("spec.stringData", "write a Secret's values through hvkube's API (hvkube create secret, or hvkube apply), which seals them: written to the Kubernetes API they would be stored in the clear")
	}
	next := api.DeepCopy(o)
	if err := s.admit(next); err != nil {
		return err
	}
	if old != nil && specChanged {
		return api.ValidateUpdate(old, o)
	}
	return nil
}

// fromReview is an object of a review as hvkube's.
func fromReview(kind string, raw []byte) (api.Object, error) {
	o, err := api.New(kind)
	if err != nil {
		return nil, api.Invalid("kind", "%s is not a kind of hvkube", kind)
	}
	if err := json.Unmarshal(raw, o); err != nil {
		return nil, api.Invalid("", "decode %s: %v", kind, err)
	}
	o.GetTypeMeta().APIVersion = api.Version
	return o, nil
}

// WebhookConfig is the ValidatingWebhookConfiguration that registers the
// admission webhook for hvkube's kinds in namespace ns: at the Service
// hvkube (port 8443) of ns, or at url when given; caPEM is the authority
// its certificate is checked by. hvkube's own accounts (the API servers'
// and the nodes') are left out: the API servers check what they write
// themselves, and the nodes are held by deploy/admission-policy.yaml, so
// hvkube keeps working while its webhook is down.
func WebhookConfig(ns, url string, caPEM []byte) map[string]any {
	client := map[string]any{"caBundle": base64.StdEncoding.EncodeToString(caPEM)}
	if url != "" {
		client["url"] = url
	} else {
		client["service"] = map[string]any{"name": "hvkube", "namespace": ns, "path": WebhookPath, "port": int64(8443)}
	}
	return map[string]any{
		"apiVersion": "admissionregistration.k8s.io/v1",
		"kind":       "ValidatingWebhookConfiguration",
		"metadata":   map[string]any{"name": "hvkube-" + ns},
		"webhooks": []any{map[string]any{
			"name":                    "validate.hvkube.io",
			"admissionReviewVersions": []any{"v1"},
			"sideEffects":             "None",
			"failurePolicy":           "Fail",
			"timeoutSeconds":          int64(10),
			"clientConfig":            client,
			"namespaceSelector":       map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": ns}},
			"rules": []any{map[string]any{
				"apiGroups":   []any{"hvkube.io"},
				"apiVersions": []any{"*"},
				"operations":  []any{"CREATE", "UPDATE"},
				"resources":   []any{"templates", "sandboxes", "sandboxpools", "agents", "displayservices", "secrets"},
				"scope":       "Namespaced",
			}},
			"matchConditions": []any{map[string]any{
				"name":       "not-hvkube-itself",
				"expression": "!(request.userInfo.username in ['system:serviceaccount:" + ns + ":hvkube-controller', 'system:serviceaccount:" + ns + ":hvkube-node'])",
			}},
		}},
	}
}
