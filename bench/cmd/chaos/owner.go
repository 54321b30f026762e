package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
)

// ownedBy reports whether the client side of an accepted loopback connection c is a socket of
// process pid (Linux: /proc/net/tcp gives the socket's inode, /proc/<pid>/fd names it). The
// gateways cannot be told apart by address (every one dials from 127.0.0.1), so a partition
// of one gateway is decided by the process that owns the connection.
func ownedBy(c net.Conn, pid int) bool {
	remote, ok := c.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return false
	}
	local, ok := c.LocalAddr().(*net.TCPAddr)
	if !ok {
		return false
	}
	inode := socketInode(remote.Port, local.Port)
	if inode == "" {
		return false
	}
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	want := "socket:[" + inode + "]"
	for _, e := range entries {
		if l, err := os.Readlink(dir + "/" + e.Name()); err == nil && l == want {
			return true
		}
	}
	return false
}

// socketInode is the inode of the IPv4 TCP socket from localPort to remotePort (both on
// loopback), or "" if there is none.
func socketInode(localPort, remotePort int) string {
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		return ""
	}
	defer f.Close()
	return findInode(bufio.NewScanner(f), localPort, remotePort)
}

// findInode scans /proc/net/tcp lines ("sl local_address rem_address st … inode …").
func findInode(sc *bufio.Scanner, localPort, remotePort int) string {
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 10 || f[0] == "sl" {
			continue
		}
		if hexPort(f[1]) == localPort && hexPort(f[2]) == remotePort {
			return f[9]
		}
	}
	return ""
}

// hexPort is the port of an address of /proc/net/tcp ("0100007F:1F90"), or -1.
func hexPort(addr string) int {
	_, p, ok := strings.Cut(addr, ":")
	if !ok {
		return -1
	}
	n, err := strconv.ParseInt(p, 16, 32)
	if err != nil {
		return -1
	}
	return int(n)
}
