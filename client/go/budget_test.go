package gpud

import "testing"

func TestAJobsBudgetFromTheEnvironmentGoesWithEveryAcquire(t *testing.T) {
	t.Setenv("GPUD_BUDGET", "")
	args, err := Request{VRAM: 1}.wire(nil)
	if err != nil || args.Budget != nil {
		t.Fatalf("no budget expected: %v %v", args.Budget, err)
	}
	t.Setenv("GPUD_BUDGET", "12:secret")
	args, err = Request{VRAM: 1}.wire(nil)
	if err != nil || args.Budget == nil || *args.Budget != "12:secret" {
		t.Fatalf("the budget handle is not sent: %v %v", args.Budget, err)
	}
}
