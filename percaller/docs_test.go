package percaller_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/toolmux/toolmux/mcpsource"
	"github.com/toolmux/toolmux/percaller"
	"github.com/toolmux/toolmux/tool"
)

// The error docs/identity.md shows a user without the secret is the one
// they get.
func TestAuthRequiredDocumented(t *testing.T) {
	cred := &percaller.Secrets{Server: "jira", Vault: newVault(t), Secrets: []percaller.Secret{{Name: "JIRA_TOKEN", Env: "JIRA_API_TOKEN"}}}
	_, err := cred.Connect(context.Background(), "key:carol", mcpsource.Config{Name: "jira"})
	if tool.KindOf(err) != tool.KindAuthRequired {
		t.Fatalf("%v", err)
	}
	doc, rerr := os.ReadFile("../docs/identity.md")
	if rerr != nil {
		t.Fatal(rerr)
	}
	if !strings.Contains(string(doc), "\n"+err.Error()+"\n") {
		t.Errorf("docs/identity.md does not show the error as it is:\n%s", err.Error())
	}
}
