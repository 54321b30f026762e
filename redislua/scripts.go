package redislua

import (
	"embed"

	"github.com/redis/go-redis/v9"
)

//go:embed lua/*.lua
var luaFiles embed.FS

// The scripts, each prefixed with the shared helpers of common.lua. Every script touches the
// keys of exactly one hash slot.
var (
	leaseScript         = loadScript("lease.lua")
	returnScript        = loadScript("return.lua")
	reportClusterScript = loadScript("report_cluster.lua")
	reportAppScript     = loadScript("report_app.lua")
	setEmergencyScript  = loadScript("set_emergency.lua")
	borrowPoolScript    = loadScript("borrow_pool.lua")
	borrowCreditScript  = loadScript("borrow_credit.lua")
	setOverrideScript   = loadScript("set_override.lua")
	leaseSlotsScript    = loadScript("lease_slots.lua")
	appendAuditScript   = loadScript("append_audit.lua")
)

func loadScript(name string) *redis.Script {
	common, err := luaFiles.ReadFile("lua/common.lua")
	if err != nil {
		panic(err)
	}
	body, err := luaFiles.ReadFile("lua/" + name)
	if err != nil {
		panic(err)
	}
	return redis.NewScript(string(common) + "\n" + string(body))
}
