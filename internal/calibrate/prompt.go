package calibrate

import (
	"context"
	"math"
	"math/rand/v2"
	"strings"
)

// words are what probe prompts are made of: common short English words, so
// every tokenizer makes a token or two of each and none finds the text odd.
var words = strings.Fields(`
	able about above across act add after again against age ago air all
	almost alone along already also always among animal answer any apple
	area arm around art ask away baby back bad bag ball bank base bear beat
	bed before begin behind bell best better big bird black blue board boat
	body bone book born both box boy bread break bright bring brother brown
	build burn busy buy call calm camp car card care carry case cat catch
	cause cell chair chance change child city class clean clear climb clock
	close cloud coast coat cold color come cook cool copy corn corner cost
	count country course cover cow cross crowd cry cup cut dance dark day
	dead deal dear deep desk die dinner direct dog door double down draw dream
	dress drink drive drop dry duck dust each ear early earth east easy eat
	edge egg eight end enemy enough even evening event ever every eye face fact
	fair fall family farm fast father fear feed feel few field fight fill final
	find fine finger fire first fish five flat floor flower fly follow food
	foot force forest form forward four free fresh friend front fruit full game
	garden gas gate gather gentle gift girl give glad glass gold good grass
	great green ground group grow guess hair half hall hand happy hard hat have
	head hear heart heat heavy help here high hill hold hole home hope horse
	hot hour house huge hunt hurry ice idea inch iron island job join joy jump
	just keep key kind king kitchen knee know lake land large last late laugh
	lead leaf learn leave left leg less letter level lie life lift light like
	line lion list listen little live long look lose loud love low lucky machine
	main make man many map mark market meat meet metal middle milk mind minute
	miss moon more morning mother mountain mouth move music name narrow near
	neck need never new next nice night nine noise north nose note number ocean
	offer office often oil old once open orange order other out over page paint
	pair paper park part party pass path pay pen people pick picture piece pink
	place plain plan plant play point pool poor port post pound power press
	pretty price print pull push quick quiet race rain raise reach read ready
	real red rest rich ride right ring river road rock roll roof room root rope
	rose round row rule run safe sail salt same sand save say school sea season
	seat second see seed sell send seven shade shape share sharp sheep shell
	shine ship shoe shop short show shut side sign silver simple sing sister
	sit six size skin sky sleep slow small smell smile snow soft soil son song
	soon sound south space speak speed spend spring square stand star start
	station stay step stick still stone stop store storm story street strong
	study sugar summer sun sure sweet swim table tail take talk tall teach team
	tell ten test thank thick thin thing think three throw tie time tiny today
	tool top touch town track trade train tree trip true try turn twelve two
	under until upon use valley very view village visit voice wait walk wall
	warm wash watch water wave way wear weather week well west wet wheel white
	whole wide wild win wind window winter wise wish wood word work world write
	yard year yellow young`)

// counter counts the tokens of text as the engine does: a whole prompt
// with its special tokens (a BOS) when start is set, else a piece to be
// appended to one.
type counter func(ctx context.Context, text string, start bool) (int, error)

// prompter makes probe prompts of a planned token length from random words.
// Not safe for concurrent use.
type prompter struct {
	rng   *rand.Rand
	count counter // nil: the length is estimated from perWord alone
	// perWord is the running estimate of tokens per word (with its space).
	perWord float64
}

func newPrompter(seed uint64, count counter) *prompter {
	return &prompter{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), count: count, perWord: 1.3}
}

func (p *prompter) word() string { return words[p.rng.IntN(len(words))] }

// extend returns base followed by random words of about want tokens; an
// empty base starts a prompt, and then want counts its special tokens too.
// Only the words are counted, not base again, so extending a long cached
// part stays cheap; where the two meet a tokenizer may merge or split a
// token, which the probe's own measurement accounts for.
func (p *prompter) extend(ctx context.Context, base string, want int) (string, error) {
	var ws []string
	grow := func(tokens float64) {
		for range max(1, int(math.Ceil(tokens/p.perWord))) {
			ws = append(ws, p.word())
		}
	}
	tail := func() string {
		if base == "" {
			return strings.Join(ws, " ")
		}
		return " " + strings.Join(ws, " ")
	}
	grow(float64(want))
	if p.count == nil {
		return base + tail(), nil
	}
	tol := max(1, want/500)
	for range 8 {
		got, err := p.count(ctx, tail(), base == "")
		if err != nil {
			return "", err
		}
		if got > 0 {
			// Clamped, so one odd count cannot make the prompt explode.
			p.perWord = min(max(float64(got)/float64(len(ws)), 0.5), 8)
		}
		switch {
		case got < want-tol:
			grow(float64(want - got))
		case got > want+tol && len(ws) > 1:
			drop := min(len(ws)-1, max(1, int(float64(got-want)/p.perWord)))
			ws = ws[:len(ws)-drop]
		default:
			return base + tail(), nil
		}
	}
	return base + tail(), nil
}
