//go:build rdma && cgo

package rdma

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/Mellanox/rdmamap"
)

// nicChoice is the RDMA device (and port) behind the node's interface.
type nicChoice struct {
	device, port, iface, why string
}

// pickDevice maps DMLC_INTERFACE (Config.Interface, a name prefix as in
// ps-lite) or else the interface owning Config.Host to its RDMA device,
// with github.com/Mellanox/rdmamap. With neither, the device is left to
// the library (the first one). It fails, naming the interface, when no
// RDMA device backs it: RDMA traffic would otherwise leave by another
// port than the one the job was told to use.
func pickDevice(cfg Config) (nicChoice, error) {
	var c nicChoice
	switch {
	case cfg.Interface != "":
		name, err := ifaceByPrefix(cfg.Interface)
		if err != nil {
			return c, err
		}
		c.iface, c.why = name, "DMLC_INTERFACE="+cfg.Interface
	case cfg.Host != "":
		name, err := ifaceByHost(cfg.Host)
		if err != nil {
			return c, err
		}
		c.iface, c.why = name, "owns "+cfg.Host
	default:
		c.why = "no DMLC_INTERFACE or DMLC_NODE_HOST: the first RDMA device"
		return c, nil
	}
	dev, err := rdmamap.GetRdmaDeviceForNetdevice(c.iface)
	if err != nil || dev == "" {
		if err == nil {
			err = fmt.Errorf("none found")
		}
		return c, fmt.Errorf("van/rdma: no RDMA device backs interface %s (%s): %v; devices here: %v; set DMLC_INTERFACE to an RDMA-capable interface, or use DMLC_ENABLE_RDMA=fabric or zmq",
			c.iface, c.why, err, rdmamap.GetRdmaDeviceList())
	}
	c.device = dev
	c.port = portOf(dev, c.iface)
	return c, nil
}

func ifaceByPrefix(prefix string) (string, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return "", fmt.Errorf("van/rdma: cannot list network interfaces: %w", err)
	}
	for _, it := range ifs {
		if strings.HasPrefix(it.Name, prefix) {
			return it.Name, nil
		}
	}
	return "", fmt.Errorf("van/rdma: no network interface named %s* (DMLC_INTERFACE)", prefix)
}

func ifaceByHost(host string) (string, error) {
	ips := []net.IP{net.ParseIP(host)}
	if ips[0] == nil {
		var err error
		if ips, err = net.LookupIP(host); err != nil {
			return "", fmt.Errorf("van/rdma: cannot resolve %s to pick its RDMA device: %w", host, err)
		}
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return "", fmt.Errorf("van/rdma: cannot list network interfaces: %w", err)
	}
	for _, it := range ifs {
		addrs, _ := it.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				for _, ip := range ips {
					if n.IP.Equal(ip) {
						return it.Name, nil
					}
				}
			}
		}
	}
	return "", fmt.Errorf("van/rdma: %s is not an address of this host: cannot pick its RDMA device (set DMLC_INTERFACE)", host)
}

// portOf finds the device port whose GID table lists the interface (RoCE);
// IPoIB and single-port devices give "1".
func portOf(dev, iface string) string {
	for _, p := range rdmamap.GetPorts(dev) {
		dir := filepath.Join(rdmamap.RdmaClassDir, dev, rdmamap.RdmaPortsdir, p, rdmamap.RdmaGidAttrDir, rdmamap.RdmaGidAttrNdevDir)
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if b, err := os.ReadFile(filepath.Join(dir, e.Name())); err == nil && strings.TrimSpace(string(b)) == iface {
				return p
			}
		}
	}
	return "1"
}
