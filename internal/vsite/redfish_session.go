package vsite

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"sort"
	"strconv"
	"time"
)

// redfishSession is a session of the SessionService: its token goes in
// X-Auth-Token. A session unused for the BMC's sessionTimeout ends.
type redfishSession struct {
	id       string
	token    string
	lastUsed time.Time
}

// defaultSessionTimeout is the SessionService's SessionTimeout, as on
// common BMCs.
const defaultSessionTimeout = 30 * time.Minute

// credentials tells whether user and password are the BMC's, in constant
// time. The digests are compared, not the strings: ConstantTimeCompare
// returns at once on a length mismatch, which would tell the length.
func (b *redfishBMC) credentials(user, password string) bool {
	gotUser, gotPassword := sha256.Sum256([]byte(user)), sha256.Sum256([]byte(password))
	wantUser, wantPassword := sha256.Sum256([]byte(b.user)), sha256.Sum256([]byte(b.password))
	u := subtle.ConstantTimeCompare(gotUser[:], wantUser[:])
	p := subtle.ConstantTimeCompare(gotPassword[:], wantPassword[:])
	return u&p == 1
}

// authorized checks a request's session token, else its basic auth.
func (b *redfishBMC) authorized(r *http.Request) bool {
	if token := r.Header.Get("X-Auth-Token"); token != "" {
		return b.sessionOf(token) != nil
	}
	user, password, ok := r.BasicAuth()
	return ok && b.credentials(user, password)
}

// sessionOf is the live session with token, nil if none; it counts as a
// use.
func (b *redfishBMC) sessionOf(token string) *redfishSession {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.endIdleSessions()
	s := b.sessions[token]
	if s != nil {
		s.lastUsed = now
	}
	return s
}

// endIdleSessions ends the sessions unused for longer than
// sessionTimeout, and returns the time it is. The caller holds mu.
func (b *redfishBMC) endIdleSessions() time.Time {
	now := b.now()
	for t, s := range b.sessions {
		if now.Sub(s.lastUsed) > b.sessionTimeout {
			delete(b.sessions, t)
		}
	}
	return now
}

func sessionPath(id string) string { return sessionsPath + "/" + id }

func (b *redfishBMC) sessionJSON(s *redfishSession) obj {
	return obj{
		"@odata.type": "#Session.v1_3_0.Session",
		"@odata.id":   sessionPath(s.id),
		"Id":          s.id,
		"Name":        "User Session",
		"UserName":    b.user,
	}
}

// createSession checks the user name and password in the body and
// answers with the session, its token in X-Auth-Token and its path in
// Location.
func (b *redfishBMC) createSession(w http.ResponseWriter, r *http.Request) {
	var req struct{ UserName, Password string }
	if err := decodeBody(r, &req); err != nil {
		redfishError(w, http.StatusBadRequest, err.Error())
		return
	}
	if !b.credentials(req.UserName, req.Password) {
		redfishError(w, http.StatusUnauthorized, "wrong user name or password")
		return
	}
	raw := make([]byte, 24)
	if _, err := rand.Read(raw); err != nil {
		redfishError(w, http.StatusInternalServerError, "making a session token: "+err.Error())
		return
	}
	b.mu.Lock()
	b.nextID++
	s := &redfishSession{id: strconv.Itoa(b.nextID), token: hex.EncodeToString(raw), lastUsed: b.now()}
	b.sessions[s.token] = s
	b.mu.Unlock()
	w.Header().Set("X-Auth-Token", s.token)
	w.Header().Set("Location", sessionPath(s.id))
	writeJSON(w, http.StatusCreated, b.sessionJSON(s))
}

// sessionByID is the live session with id, nil if none.
func (b *redfishBMC) sessionByID(id string) *redfishSession {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.endIdleSessions()
	for _, s := range b.sessions {
		if s.id == id {
			return s
		}
	}
	return nil
}

func (b *redfishBMC) session(w http.ResponseWriter, r *http.Request) {
	s := b.sessionByID(r.PathValue("sid"))
	if s == nil {
		redfishError(w, http.StatusNotFound, "no session "+r.PathValue("sid"))
		return
	}
	writeJSON(w, http.StatusOK, b.sessionJSON(s))
}

func (b *redfishBMC) deleteSession(w http.ResponseWriter, r *http.Request) {
	s := b.sessionByID(r.PathValue("sid"))
	if s == nil {
		redfishError(w, http.StatusNotFound, "no session "+r.PathValue("sid"))
		return
	}
	b.mu.Lock()
	delete(b.sessions, s.token)
	b.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (b *redfishBMC) sessionList(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	b.endIdleSessions()
	var paths []string
	for _, s := range b.sessions {
		paths = append(paths, sessionPath(s.id))
	}
	b.mu.Unlock()
	sort.Strings(paths)
	writeJSON(w, http.StatusOK, collection("#SessionCollection.SessionCollection", sessionsPath, "Sessions", paths...))
}

func (b *redfishBMC) sessionService(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, obj{
		"@odata.type":    "#SessionService.v1_1_8.SessionService",
		"@odata.id":      "/redfish/v1/SessionService",
		"Id":             "SessionService",
		"Name":           "Session Service",
		"ServiceEnabled": true,
		"SessionTimeout": int(b.sessionTimeout / time.Second),
		"Sessions":       link(sessionsPath),
	})
}
