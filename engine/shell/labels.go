package shell

import (
	"context"
	"fmt"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/client"
)

// Visibility labels, with HBase's shell verbs and syntax (docs/security.md, "Visibility labels").

// labelList reads 'label' or ['label', ...].
func labelList(args []Value, i int, what string) ([]string, error) {
	if i >= len(args) {
		return nil, usage("missing %s: 'label' or ['label', ...]", what)
	}
	switch v := args[i]; v.Kind {
	case String, Const:
		return []string{v.Str}, nil
	case Array:
		out := make([]string, 0, len(v.Items))
		for _, it := range v.Items {
			if it.Kind != String && it.Kind != Const {
				return nil, usage("%s: labels are quoted strings, got %s", what, it)
			}
			out = append(out, it.Str)
		}
		if len(out) == 0 {
			return nil, usage("%s: give at least one label", what)
		}
		return out, nil
	default:
		return nil, usage("%s must be 'label' or ['label', ...], got %s", what, v)
	}
}

// authorizations reads a read's AUTHORIZATIONS => ['label', ...] into its attributes.
func authorizations(attrs map[string][]byte, v Value) (map[string][]byte, error) {
	labels, err := labelList([]Value{v}, 0, "AUTHORIZATIONS")
	if err != nil {
		return nil, err
	}
	attrs, err = client.WithAuthorizations(attrs, labels...)
	if err != nil {
		return nil, usage("%v", err)
	}
	return attrs, nil
}

// add_labels 'label' | ['label', ...]
func (s *Shell) addLabels(ctx context.Context, args []Value) error {
	labels, err := labelList(args, 0, "labels")
	if err != nil {
		return err
	}
	return s.master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.AddLabels(ctx, &pb.AddLabelsRequest{Labels: labels})
		return err
	})
}

// list_labels['regex']
func (s *Shell) listLabels(ctx context.Context, args []Value) error {
	req := &pb.ListLabelsRequest{}
	if len(args) > 0 {
		re, err := str(args, 0, "regex")
		if err != nil {
			return err
		}
		req.Regex = re
	}
	var resp *pb.ListLabelsResponse
	if err := s.master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		var err error
		resp, err = m.ListLabels(ctx, req)
		return err
	}); err != nil {
		return err
	}
	s.printLabels(resp.GetLabels())
	return nil
}

// set_auths 'user' | '@group', 'label' | ['label', ...]
func (s *Shell) setAuths(ctx context.Context, args []Value) error {
	return s.changeAuths(ctx, args, func(ctx context.Context, m pb.MasterClient, user string, labels []string) error {
		_, err := m.SetAuths(ctx, &pb.SetAuthsRequest{User: user, Labels: labels})
		return err
	})
}

// clear_auths 'user' | '@group', 'label' | ['label', ...]
func (s *Shell) clearAuths(ctx context.Context, args []Value) error {
	return s.changeAuths(ctx, args, func(ctx context.Context, m pb.MasterClient, user string, labels []string) error {
		_, err := m.ClearAuths(ctx, &pb.ClearAuthsRequest{User: user, Labels: labels})
		return err
	})
}

// changeAuths reads set_auths' and clear_auths' arguments and runs change with them.
func (s *Shell) changeAuths(ctx context.Context, args []Value, change func(context.Context, pb.MasterClient, string, []string) error) error {
	user, err := str(args, 0, "user or @group")
	if err != nil {
		return err
	}
	labels, err := labelList(args, 1, "labels")
	if err != nil {
		return err
	}
	return s.master(ctx, func(ctx context.Context, m pb.MasterClient) error { return change(ctx, m, user, labels) })
}

// get_auths 'user' | '@group'
func (s *Shell) getAuths(ctx context.Context, args []Value) error {
	user, err := str(args, 0, "user or @group")
	if err != nil {
		return err
	}
	var resp *pb.GetAuthsResponse
	if err := s.master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		var err error
		resp, err = m.GetAuths(ctx, &pb.GetAuthsRequest{User: user})
		return err
	}); err != nil {
		return err
	}
	s.printLabels(resp.GetLabels())
	return nil
}

// printLabels lists labels one a line, then their count.
func (s *Shell) printLabels(labels []string) {
	for _, l := range labels {
		fmt.Fprintln(s.Out, l)
	}
	fmt.Fprintf(s.Out, "%d label(s)\n", len(labels))
}
