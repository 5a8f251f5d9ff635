# mk/install.mk - `make install` and `make uninstall`: the binaries, the systemd unit, the
# sysusers.d file and the example environment file, each line printed as it goes.
#
#   make install [PREFIX=/usr/local] [DESTDIR=/tmp/pkg]   build (`all`), then install
#   make install-files ...                                install $(BIN)'s binaries as they are, no build
#   make uninstall [PREFIX=...] [DESTDIR=...]             remove what install put there
#
# install-files is what the tests call (with BIN=$DT_BIN_DIR): they install the very binaries they
# test, and never relink them while other tests run. The unit's ExecStart is rewritten to
# $(PREFIX)/bin; /etc stays /etc whatever PREFIX is. Nothing under /etc/dtrain but the example is
# touched: an existing dtraind.env, token or TF_CONFIG is never overwritten or removed, nor is the
# state in /var/lib/dtrain. Neither target runs systemd-sysusers or systemctl: install prints them.

PREFIX        ?= /usr/local
DESTDIR       ?=
INSTALL_BIN   := $(DESTDIR)$(PREFIX)/bin
INSTALL_UNIT  := $(DESTDIR)$(PREFIX)/lib/systemd/system/dtraind.service
INSTALL_USERS := $(DESTDIR)$(PREFIX)/lib/sysusers.d/dtrain.conf
INSTALL_ENV   := $(DESTDIR)/etc/dtrain/dtraind.env.example

# mkdir_if DIR: create DIR 0755 when missing; an existing one keeps its mode (/etc/dtrain 0750).
mkdir_if = [ -d $(1) ] || install -d -m 755 $(1)

.PHONY: install install-files uninstall

install: all
	@$(MAKE) --no-print-directory install-files

install-files:
	@for f in $(BIN)/dtraind $(BIN)/dtrain; do \
	  test -x $$f || { echo "install: $$f is missing: run 'make' first"; exit 2; }; done
	@$(call mkdir_if,$(INSTALL_BIN))
	@for f in dtraind dtrain; do \
	  install -m 755 $(BIN)/$$f $(INSTALL_BIN)/$$f && echo "  INSTALL $(INSTALL_BIN)/$$f"; done
	@$(call mkdir_if,$(dir $(INSTALL_UNIT))) && $(call mkdir_if,$(dir $(INSTALL_USERS)))
	@sed 's|^ExecStart=/usr/local/bin/dtraind |ExecStart=$(PREFIX)/bin/dtraind |' \
	  config/systemd/dtraind.service >$(INSTALL_UNIT).tmp
	@grep -q '^ExecStart=$(PREFIX)/bin/dtraind ' $(INSTALL_UNIT).tmp || \
	  { rm -f $(INSTALL_UNIT).tmp; echo "install: ExecStart of dtraind.service not rewritten"; exit 2; }
	@chmod 644 $(INSTALL_UNIT).tmp && mv $(INSTALL_UNIT).tmp $(INSTALL_UNIT)
	@echo "  INSTALL $(INSTALL_UNIT)  (ExecStart=$(PREFIX)/bin/dtraind)"
	@install -m 644 config/systemd/dtrain.sysusers.conf $(INSTALL_USERS)
	@echo "  INSTALL $(INSTALL_USERS)"
	@$(call mkdir_if,$(dir $(INSTALL_ENV)))
	@install -m 644 config/systemd/dtraind.env.example $(INSTALL_ENV)
	@echo "  INSTALL $(INSTALL_ENV)"
	@echo "next, as root: systemd-sysusers; /etc/dtrain/tf_config.json and token (root:dtrain 0640);"
	@echo "  data in /srv/dtrain; systemctl daemon-reload; systemctl enable --now dtraind (see README)"

uninstall:
	@for f in $(INSTALL_BIN)/dtraind $(INSTALL_BIN)/dtrain $(INSTALL_UNIT) $(INSTALL_USERS) \
	    $(INSTALL_ENV); do \
	  if [ -e $$f ]; then rm -f $$f && echo "  REMOVE  $$f"; fi; done
	@rmdir $(dir $(INSTALL_ENV)) 2>/dev/null && echo "  REMOVE  $(dir $(INSTALL_ENV))" || true
	@echo "kept: /etc/dtrain's configuration and /var/lib/dtrain; the dtrain user (systemd-sysusers made it)"
